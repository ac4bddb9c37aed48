// Package loopdev attaches files to loop devices for tests (losetup) and gives each device
// back as the test found it: detached, with the node's owner and mode restored. Storage hands
// a claim's block device to the VM's user for good (as KubeVirt's virt-handler does), so a
// test that boots a VM on a loop device would otherwise leave /dev/loopN to uid 107 for every
// later test on the machine.
package loopdev
