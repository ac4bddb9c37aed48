package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// CheckTimeout bounds each readiness check: a probe that hangs is as bad as one that fails.
const CheckTimeout = 2 * time.Second

// ErrNotSynced is a cache that has not synced (yet).
var ErrNotSynced = errors.New("caches not synced")

// APIReachable checks the API server with a live request (GET /version: cheap, allowed to
// every authenticated client), not the cache, which stays synced while the API server is gone.
func APIReachable(cfg *rest.Config) (healthz.Checker, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = CheckTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("api reachability check: %w", err)
	}
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), CheckTimeout)
		defer cancel()
		if err := dc.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
			return fmt.Errorf("api server: %w", err)
		}
		return nil
	}, nil
}

// CachesSynced checks that every informer of c has synced (false before the manager started
// them, too).
func CachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return ErrNotSynced
		}
		return nil
	}
}
