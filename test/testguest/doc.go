// Package testguest is the test fixture for everything that needs a real guest: it builds the
// test guest (test/assets/guest/build.sh: Debian cloud kernel + busybox initramfs with qemu-ga,
// acpid, a hotplug watcher and udhcpc) once per test process, boots it under QEMU with a minimal
// argv of its own (not the project's qemu driver), and reads the serial console for the markers
// the guest prints.
//
// It owns: the guest assets (Assets), the console protocol (the Marker* constants, Console) and
// the minimal boot fixture (Boot, VM). Tests in other packages use it like this:
//
//	vm := testguest.Boot(t, testguest.BootOptions{DataDisk: true})
//	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
//	defer cancel()
//	if err := vm.Console.Wait(ctx, testguest.MarkerReady); err != nil { t.Fatal(err) }
//	// talk QMP on vm.QMPSocket, the guest agent on vm.QGASocket
package testguest
