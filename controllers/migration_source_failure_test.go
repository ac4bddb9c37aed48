package controllers

import (
	"errors"
	"testing"
)

func TestSourceFailure(t *testing.T) {
	broken := errors.New("launcher: rpc error: code = Aborted desc = finalize migration: migrate: status failed: Unable to write to socket: Broken pipe")
	for _, c := range []struct {
		name    string
		err     error
		why     string
		aborted bool
		want    string
	}{
		{"stream broke", broken, "", false,
			"the stream to the target broke (its launcher or node agent went away, or the link between the nodes failed): launcher: finalize migration: migrate: status failed: Unable to write to socket: Broken pipe"},
		{"own reason first", broken, "progress timeout (150 s without progress)", false,
			"progress timeout (150 s without progress): launcher: finalize migration: migrate: status failed: Unable to write to socket: Broken pipe"},
		{"aborted", errors.New("rpc error: code = Canceled desc = migration cancelled"), "", true, "aborted: migration cancelled"},
		{"other", errors.New("finalize migration: stop source: no domain"), "", false, "finalize migration: stop source: no domain"},
	} {
		if got := sourceFailure(c.err, c.why, c.aborted); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
