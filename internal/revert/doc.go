// Package revert undoes the completed steps of a multi-step side effect when a later step
// fails (the shape of incus' shared/revert: New, Add, Fail, Success):
//
//	func op() error {
//		r := revert.New()
//		defer r.Fail()
//		… one step …
//		r.Add(func() { undoTheStep() }) // cannot fail, or logs its own failure
//		… more steps, each followed by its undo …
//		r.Success()
//		return nil
//	}
//
// Fail runs the undo steps newest first (LIFO), each once, also when an earlier one failed;
// Success disarms it, so the deferred Fail of a successful operation does nothing. Calling
// Fail early (to undo before reading what the undo left behind) is fine: the deferred call
// then does nothing.
//
// How a caller sees undo errors: an undo step whose error matters is added with AddErr, and
// the function defers FailErr with its named error result instead of Fail. FailErr joins the
// undo errors (errors.Join, each wrapped "undo: …") to the operation's error, so they are
// returned, never dropped; when no undo step failed the operation's error is returned as it
// was, unwrapped:
//
//	func op() (err error) {
//		r := revert.New()
//		defer r.FailErr(&err) // err: the step's error, then "undo: …" for each failed undo
//		…
//		r.AddErr(func() error { return removeIt() })
//		…
//		r.Success()
//		return nil
//	}
//
// Plain Fail has no result (so that `defer r.Fail()` reads as in incus) and drops the errors
// of AddErr steps: a function that uses AddErr defers FailErr.
//
// A Reverter is used by one goroutine. The package imports only the standard library, so host
// packages, the launcher and controllers all use it.
package revert
