// Package imagebuild builds vmlet's own OCI images without a container engine, with
// go-containerregistry: vmlet.dev/vmlet:dev (the vmlet and vmctl binaries, and qemu-img the
// agent runs), vmlet.dev/vmlet-launcher:dev (vmlet-launcher and QEMU from Debian packages) and
// vmlet.dev/pause:dev (cmd/vmlet-pause, containerd's sandbox image). hack/images.sh (`make
// images`) drives it (through hack/imagebuild) and writes each image as an OCI archive (an OCI
// image layout in a tar, named with io.containerd.image.name) that
// `ctr -n k8s.io images import FILE` accepts, keeping the manifest digest.
//
// Planning is pure: Plan turns a Spec (host files → paths in the image, modes, symlinks,
// folders) into the sorted list of tar entries of the image's single layer, with every parent
// folder, checking that paths are absolute, clean and unique. The apply side is thin: Layer
// reads the host files into a tar, Build adds the image config (entrypoint, env, user) and
// WriteArchive writes the archive.
//
// QEMU's files are data: qemu-files.txt lists what QEMU and qemu-img load, each with its Debian
// package, measured under strace by booting the test guest with every device vmlet attaches
// (TestQEMUFiles; -update rewrites it). hack/images.sh downloads those packages (checked to be
// in the dependency closure of qemu-system-x86 and qemu-utils), unpacks them, and Specs takes
// the listed files from there, under merged /usr, symlinks followed. TestLauncherImageBootsGuest
// boots the test guest with the image's QEMU (chroot, as the launcher's uid 107); TestImages
// imports the images into a private containerd and runs them.
//
// Images are reproducible: entries sorted by path, owner 0:0 with no user or group names, one
// fixed modification time (SOURCE_DATE_EPOCH, else the Unix epoch) on every entry and in the
// config, no host-dependent metadata, gzip without a header time. The same inputs give the same
// digests on every machine.
//
// Equivalent by hand: a Dockerfile `FROM scratch` + `COPY --chmod=...` per file, built with
// `docker build` under SOURCE_DATE_EPOCH and rewrite-timestamp, then `docker save IMG > FILE`.
package imagebuild
