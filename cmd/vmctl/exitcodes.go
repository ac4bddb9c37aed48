package main

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// Exit statuses: this list is the one place they are defined; exitCodesHelp (in every
// command's help) and exitCode are made from it.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitNotFound  = 3
	exitBlocked   = 4
	exitRefused   = 5
	exitForbidden = 6
	exitConflict  = 7
)

var exitCodes = []struct {
	code int
	what string
}{
	{exitOK, "done"},
	{exitError, "the call failed (the API server or launcher could not be reached, or answered an error not listed here; for top: no agent answered, no node advertises metrics)"},
	{exitUsage, "usage: unknown command or flag, wrong arguments"},
	{exitNotFound, "not found: VM commands and evacuate-cancel: the VMI (or a migration to cancel) does not exist, or the subresources API is not served; top NAME: no such VMI in the metrics of the agents that answered"},
	{exitBlocked, "gave up waiting: drain: VMIs still on the node at --deadline; migrate --wait: the migration had not ended at --deadline"},
	{exitRefused, "refused by the VM: qmp got a QMP error reply (printed on stderr with its class); migrate --wait: the migration Failed"},
	{exitForbidden, "forbidden (HTTP 403; VM commands): RBAC on virtualmachineinstances/<subresource> (or on the VMI or its migrations), or the QMP command allow-list"},
	{exitConflict, "conflict (HTTP 409; VM commands): the VMI is not running, or has no display or no guest agent; evacuate-cancel: the node carries the drain taint"},
}

// exitCodesHelp is the exit status list as the help prints it.
var exitCodesHelp = func() string {
	var b strings.Builder
	b.WriteString("Exit status (ssh: ssh's own, once ssh runs):\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "  %d  %s\n", e.code, wrap(e.what, 90, "     "))
	}
	return strings.TrimRight(b.String(), "\n")
}()

// exitStatusError is a status chosen by the command itself (ssh passes ssh's on).
// quiet: the command already said why (ssh printed its own message).
type exitStatusError struct {
	code  int
	err   error
	quiet bool
}

func (e *exitStatusError) Error() string { return e.err.Error() }
func (e *exitStatusError) Unwrap() error { return e.err }

// exitCode is the exit status of a command's error.
func exitCode(err error) int {
	var ue usageError
	var se *exitStatusError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &se):
		return se.code
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitNotFound
	case errors.Is(err, errBlocked):
		return exitBlocked
	case errors.Is(err, subresclient.ErrQMP), errors.Is(err, errMigrationFailed):
		return exitRefused
	case errors.Is(err, errForbidden):
		return exitForbidden
	case errors.Is(err, errConflict):
		return exitConflict
	}
	return exitError
}

var (
	// errConflict: the VMI is not in a state the command can act on (exit status 7).
	errConflict = errors.New("conflict")
	// errForbidden: RBAC or the QMP allow-list refused (exit status 6).
	errForbidden = errors.New("forbidden")
)

// apiStatusError marks an API answer with the sentinel of its exit status.
type apiStatusError struct {
	err  error
	kind error
}

func (e *apiStatusError) Error() string        { return e.err.Error() }
func (e *apiStatusError) Unwrap() error        { return e.err }
func (e *apiStatusError) Is(target error) bool { return target == e.kind }

// classifyAPI gives the VM commands' API errors their exit status: 404 → 3, 403 → 6,
// 409 → 7. (drain, uncordon and top keep 1 for these, as before the VM commands existed.)
func classifyAPI(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return &apiStatusError{err, errNotFound}
	case apierrors.IsForbidden(err):
		return &apiStatusError{err, errForbidden}
	case apierrors.IsConflict(err):
		return &apiStatusError{err, errConflict}
	}
	return err
}

// wrap breaks s into lines of at most width, the ones after the first indented.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
