package imagebuild

import "io/fs"

// The uid and gid the launcher runs as (controllers/launcherpod.DefaultRunAsUser: KubeVirt's
// qemu user). Everything in the launcher image is readable (and, for programs, executable) by
// it: modes 0644/0755, owner root.
const LauncherUID = "107"

// Pause is vmlet.dev/pause:dev: the static cmd/vmlet-pause binary bin as /pause, run as
// 65535:65535 like Kubernetes' own pause image.
func Pause(bin string) Spec {
	return Spec{
		Ref:        PauseRef,
		Files:      []File{{Source: bin, Path: "/pause", Mode: 0o755}},
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	}
}

// mergedUsr are Debian's merged-/usr links: files are placed under /usr, the old paths
// (the dynamic loader's /lib64/ld-linux-x86-64.so.2, /lib/...) resolve through them.
var mergedUsr = []Symlink{
	{Path: "/bin", Target: "usr/bin"},
	{Path: "/lib", Target: "usr/lib"},
	{Path: "/lib64", Target: "usr/lib64"},
	{Path: "/sbin", Target: "usr/sbin"},
}

// base is what every non-pause image has: merged-/usr links, a world-writable /tmp and
// /etc/passwd and /etc/group naming root and the launcher's qemu user.
func base() Spec {
	return Spec{
		Symlinks: append([]Symlink(nil), mergedUsr...),
		Dirs: []Dir{
			{Path: "/tmp", Mode: 0o777 | fs.ModeSticky},
			{Path: "/usr/bin"}, {Path: "/usr/lib"}, {Path: "/usr/lib64"}, {Path: "/usr/sbin"},
		},
		Files: []File{
			{Path: "/etc/passwd", Content: []byte("root:x:0:0:root:/root:/sbin/nologin\nqemu:x:107:107:qemu:/tmp:/sbin/nologin\n")},
			{Path: "/etc/group", Content: []byte("root:x:0:\nqemu:x:107:\nkvm:x:108:qemu\n")},
		},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
}
