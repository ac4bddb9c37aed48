package vmistream

import "testing"

func TestAllowList(t *testing.T) {
	a, err := ParseAllowList("query-*, human-monitor-command")
	if err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]bool{
		"query-status": true, "query-commands": true, "human-monitor-command": true,
		"quit": false, "stop": false, "xquery-status": false, "": false,
	} {
		if got := a.Allows(cmd); got != want {
			t.Errorf("%v.Allows(%q) = %v, want %v", a, cmd, got, want)
		}
	}
	if all, _ := ParseAllowList("*"); !all.Allows("quit") {
		t.Error(`"*" does not allow quit`)
	}
	if none, _ := ParseAllowList(""); none.Allows("query-status") {
		t.Error("empty list allows query-status")
	}
	if _, err := ParseAllowList("query-["); err == nil {
		t.Error("malformed pattern accepted")
	}
	for in, want := range map[string]string{
		`{"execute":"query-status"}`: "query-status", `{"exec-oob":"migrate-pause"}`: "migrate-pause",
	} {
		if got, err := CommandName([]byte(in)); err != nil || got != want {
			t.Errorf("CommandName(%s) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{`{}`, `[]`, `nope`} {
		if _, err := CommandName([]byte(in)); err == nil {
			t.Errorf("CommandName(%s) accepted", in)
		}
	}
}
