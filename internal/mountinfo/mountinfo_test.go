package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/sys/fs/cgroup/unified`: "/sys/fs/cgroup/unified",
		`/mnt/with\040space`:     "/mnt/with space",
		`/a\011tab\012nl\134bs`:  "/a\ttab\nnl\\bs",
		`/not\09octal`:           `/not\09octal`,
		`/short\04`:              `/short\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
