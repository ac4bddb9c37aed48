package health_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/controllers/health"
)

// TestHandler: 200 "ok" while every check passes (each listed with ?verbose), 500 naming the
// failing check with its error in full, /NAME runs one check, an unknown one is 404.
func TestHandler(t *testing.T) {
	var launchers error
	h := health.Handler(health.Checks{
		"api-server": func(*http.Request) error { return nil },
		"launchers":  func(*http.Request) error { return launchers },
	})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	for _, tt := range []struct {
		path, fail string
		code       int
		want       []string
	}{
		{"/", "", 200, []string{"ok"}},
		{"/?verbose", "", 200, []string{"[+]api-server ok\n[+]launchers ok\ncheck passed"}},
		{"/", "ns/vm1 (get domain: deadline exceeded)", 500, []string{"[+]api-server ok", "[-]launchers failed: ns/vm1 (get domain: deadline exceeded)", "check failed"}},
		{"/api-server", "ns/vm1", 200, []string{"ok"}},
		{"/launchers", "ns/vm1", 500, []string{"[-]launchers failed: ns/vm1"}},
		{"/nosuch", "", 404, nil},
	} {
		launchers = nil
		if tt.fail != "" {
			launchers = errors.New(tt.fail)
		}
		code, body := get(tt.path)
		if code != tt.code {
			t.Errorf("GET %s (launchers %v) = %d %q, want %d", tt.path, launchers, code, body, tt.code)
		}
		for _, w := range tt.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s (launchers %v): body %q lacks %q", tt.path, launchers, body, w)
			}
		}
	}
}

// TestListen: "0" and "" are off; a port in use is ErrListen naming the flag.
func TestListen(t *testing.T) {
	for _, off := range []string{"", "0"} {
		if ln, err := health.Listen("--x", off); ln != nil || err != nil {
			t.Errorf("Listen(%q) = %v, %v; want off", off, ln, err)
		}
	}
	ln, err := health.Listen("--x", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = health.Listen("--health-probe-bind-address", ln.Addr().String())
	var oe *net.OpError
	if !errors.Is(err, health.ErrListen) || !errors.As(err, &oe) || !strings.Contains(err.Error(), "--health-probe-bind-address") {
		t.Fatalf("Listen on a port in use = %v, want ErrListen naming the flag", err)
	}
}
