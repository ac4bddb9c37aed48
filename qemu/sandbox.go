package qemu

// Sandbox is QEMU's own seccomp filter (`-sandbox`): which groups of system calls QEMU is
// denied once it has started. QEMU installs the filter itself (libseccomp, with
// PR_SET_NO_NEW_PRIVS) before it runs the guest; a denied call kills QEMU.
type Sandbox struct {
	// Off leaves QEMU unfiltered (`-sandbox off`, QEMU's default); the zero value is on.
	Off bool
}

// sandboxArgs returns the -sandbox arguments for s: KubeVirt's and libvirt's "on" with every
// optional group denied, that is no obsolete system calls, no set*uid/set*gid/setgroups
// (elevateprivileges), no fork/vfork/execve (spawn: vmlet passes QEMU every file it needs, so
// it never execs a helper such as qemu-bridge-helper or an exec: migration) and no
// scheduler/affinity/priority changes (resourcecontrol). The zero Sandbox is on.
//
// Equivalent to: qemu-system-x86_64 -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny
func sandboxArgs(s Sandbox) []string {
	if s.Off {
		return []string{"-sandbox", "off"}
	}
	return []string{"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"}
}
