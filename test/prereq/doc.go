// Package prereq holds test guards for privileged or hardware-dependent tests. On a developer
// machine a missing prerequisite skips the test with the reason; under CI (CI=true) it fails
// the test instead, because CI machines have root, QEMU, netns, cgroup2 and BPF and a skip there
// would hide a broken setup. The one exception is KVM, absent on these machines: KVM tests skip
// with a message containing "KVM not usable".
package prereq
