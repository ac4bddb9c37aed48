// Command imagebuild writes vmlet's images (internal/imagebuild) as OCI archives into --out:
// pause.tar, vmlet.tar and vmlet-launcher.tar (pause only without --root). hack/images.sh
// (`make images`) builds the binaries and unpacks the Debian packages, then runs it. It prints
// one line per image on stdout: file, reference, manifest digest, compressed and uncompressed
// size in bytes.
package main
