// Package mountinfo holds what the host packages share to read /proc/self/mountinfo (proc(5)):
// today the kernel's escaping of paths in it.
package mountinfo
