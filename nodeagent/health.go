package nodeagent

import (
	"errors"
	"net/http"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// SELinuxCheck is the agent's SELinux readiness entry, named for the node's mode
// ("selinux-disabled", "selinux-permissive", "selinux-enforcing": /readyz?verbose lists it). It
// fails on an enforcing node where the agent labels nothing (--selinux-relabel=never), whose
// confined launchers would be denied their files.
func (a *Agent) SELinuxCheck() (string, healthz.Checker) {
	s := a.Reconciler.SELinux
	return "selinux-" + a.Facts.SELinuxMode(), func(*http.Request) error {
		if s != nil && s.State.Enforcing() && !s.Labels() {
			return errors.New("SELinux is enforcing and --selinux-relabel=never: launchers may be denied their files")
		}
		return nil
	}
}

// LaunchersCheck is the agent's readiness check of its launchers: every Running VMI's answers
// within controllers.LauncherAnswerTimeout (VMIReconciler.LaunchersAnswer; the failure names
// the VMIs). In pod mode the device plugin has its own check (deviceplugin.Manager.Check).
func (a *Agent) LaunchersCheck() healthz.Checker {
	return func(req *http.Request) error { return a.Reconciler.LaunchersAnswer(req.Context()) }
}
