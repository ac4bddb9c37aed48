package cpuweight

import "errors"

// Sentinel errors; test with errors.Is.
var (
	// ErrNoCPUController: neither a cgroup-v1 cpu hierarchy nor a cgroup2 mount offering the
	// cpu controller is there; VMs run without weights.
	ErrNoCPUController = errors.New("no cgroup cpu controller")
	// ErrForeignThread: a thread id given to PlaceVCPUs is not a thread of that VM's group.
	ErrForeignThread = errors.New("not a thread of the VM's cgroup")
	// ErrBusy: a VM group still had tasks when its removal's deadline passed.
	ErrBusy = errors.New("cpu cgroup still has tasks")
)
