// Command imagebuild writes vmlet's images (internal/imagebuild) as `docker save` tarballs into
// --out: pause.tar, vmlet.tar and vmlet-launcher.tar, each for the inputs given. hack/images.sh
// (`make images`) builds the binaries and unpacks the Debian packages, then runs it. It prints
// one line per image on stdout: file, reference, manifest digest, compressed and uncompressed
// size in bytes.
package main
