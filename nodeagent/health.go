package nodeagent

import (
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// LaunchersCheck is the agent's readiness check of its launchers: every Running VMI's answers
// within controllers.LauncherAnswerTimeout (VMIReconciler.LaunchersAnswer; the failure names
// the VMIs). There is no device plugin to check yet (issue #16).
func (a *Agent) LaunchersCheck() healthz.Checker {
	return func(req *http.Request) error { return a.Reconciler.LaunchersAnswer(req.Context()) }
}
