package revert_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/vmlet/vmlet/internal/revert"
)

func TestReverter(t *testing.T) {
	errA, errC := errors.New("a failed"), errors.New("c failed")
	opErr := errors.New("step failed")
	for _, tc := range []struct {
		name    string
		success bool  // call Success before Fail
		opErr   error // the operation's error handed to FailErr
		wantRan []string
		wantErr string // FailErr's result; "" for nil
		wantIs  []error
	}{
		{name: "fail runs undos newest first", opErr: opErr, wantRan: []string{"c", "b", "a"},
			wantErr: "step failed\nundo: c failed\nundo: a failed", wantIs: []error{opErr, errA, errC}},
		{name: "success disarms", success: true, wantRan: nil},
		{name: "undo errors without an operation error (a panic)", wantRan: []string{"c", "b", "a"},
			wantErr: "undo: c failed\nundo: a failed", wantIs: []error{errA, errC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran []string
			r := revert.New()
			r.AddErr(func() error { ran = append(ran, "a"); return errA })
			r.Add(func() { ran = append(ran, "b") })
			r.AddErr(func() error { ran = append(ran, "c"); return errC })
			if tc.success {
				r.Success()
			}
			err := tc.opErr
			r.FailErr(&err)
			r.FailErr(&err) // a second Fail does nothing
			r.Fail()
			if !slices.Equal(ran, tc.wantRan) {
				t.Errorf("undo ran %v, want %v", ran, tc.wantRan)
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("err = %q, want %q", got, tc.wantErr)
			}
			for _, want := range tc.wantIs {
				if !errors.Is(err, want) {
					t.Errorf("errors.Is(err, %v) = false", want)
				}
			}
		})
	}
}

// A step's error is returned as it was when no undo failed: callers may match it by type or
// identity.
func TestFailErrKeepsOperationError(t *testing.T) {
	opErr := errors.New("step failed")
	r := revert.New()
	undone := false
	r.AddErr(func() error { undone = true; return nil })
	err := opErr
	r.FailErr(&err)
	if !undone {
		t.Error("undo did not run")
	}
	if err != opErr { //nolint:errorlint // identity is the point
		t.Errorf("err = %v, want the operation's error itself", err)
	}
}

func TestFailOnceAndZeroValue(t *testing.T) {
	var r revert.Reverter
	n := 0
	r.Add(func() { n++ })
	r.Fail()
	r.Fail()
	r.Add(func() { n += 10 }) // after Fail: never run
	r.Fail()
	if n != 1 {
		t.Errorf("undo ran %d times, want 1", n)
	}
}

func TestSuccessThenNoUndo(t *testing.T) {
	r := revert.New()
	r.Add(func() { t.Error("undo ran after Success") })
	r.Success()
	r.Fail()
	var err error
	r.FailErr(&err)
	if err != nil {
		t.Errorf("err = %v, want nil", err)
	}
}

func Example() {
	steps := func(fail bool) (err error) {
		r := revert.New()
		defer r.FailErr(&err)
		fmt.Println("step 1")
		r.AddErr(func() error { fmt.Println("undo step 1"); return errors.New("step 1 is stuck") })
		r.Add(func() { fmt.Println("undo step 2") })
		if fail {
			return errors.New("step 3 failed")
		}
		r.Success()
		return nil
	}
	fmt.Println(steps(false))
	fmt.Println(steps(true))
	// Output:
	// step 1
	// <nil>
	// step 1
	// undo step 2
	// undo step 1
	// step 3 failed
	// undo: step 1 is stuck
}
