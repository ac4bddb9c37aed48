package cluster

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// transitions hold, per VMI, the Events that announce a status change a pass made (launcher
// pod scheduled, VMI failed, ...) until the status write that makes the change real succeeds.
// A pass whose write conflicts (the node agent wrote the VMI meanwhile) runs again from the
// API's copy, sees the same change to make and announces it then: sent at once, each such Event
// would come twice.
type transitions struct {
	mu sync.Mutex
	m  map[types.UID][]func()
}

// add keeps send (an Event) until take.
func (t *transitions) add(uid types.UID, send func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[types.UID][]func(){}
	}
	t.m[uid] = append(t.m[uid], send)
}

// take returns and forgets what add kept for the VMI.
func (t *transitions) take(uid types.UID) []func() {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[uid]
	delete(t.m, uid)
	return s
}
