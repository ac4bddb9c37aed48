// Package prereq holds test guards for privileged or hardware-dependent tests. On a developer
// machine a missing prerequisite skips the test with the reason; under CI (CI=true) it fails
// the test instead, because CI machines have root, QEMU, netns, cgroup2 and BPF and a skip there
// would hide a broken setup. The one exception is KVM, absent on these machines: KVM tests skip
// with a message containing "KVM not usable".
//
// Every guard (Root, QEMU, KVM, APIServer, and testguest.Assets, which calls Short) skips the
// test under `go test -short` first, whatever the machine has: `make unit` runs exactly the
// tests that call none of them. That selection cannot drop a test silently: a test leaves the
// unit run only by a guard's SKIP line, which names what it needs. `make test` never passes
// -short, and under CI=true hack/testreport fails any skip but "KVM not usable", so a -short
// there would fail the run rather than shrink it.
package prereq
