// Package logbuf holds Buffer, a bytes.Buffer that one writer (an exec.Cmd's output copier, a
// logger) and many readers (a test printing it on failure) may use at once. Tests use it to
// capture QEMU's and the launcher's output.
package logbuf
