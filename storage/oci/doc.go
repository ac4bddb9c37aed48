// Package oci pulls OCI images that carry VM disks and kernels, as KubeVirt defines them:
// a containerDisk holds one disk file (qcow2 or raw) under /disk/ (or at a given path), a
// kernelBoot image holds a kernel and optionally an initrd at given paths.
//
// Images come from a registry (over the registry HTTP protocol, with
// github.com/google/go-containerregistry) or from an OCI layout on disk ("oci:/abs/dir[:tag]" or
// "oci:/abs/dir@sha256:…"). Every manifest, config and layer is checked against its digest
// (and every layer's uncompressed stream against the config's diff_id) while it is unpacked.
// Unpacked images live in a cache folder keyed by manifest digest and are read-only once
// complete; concurrent pulls of one digest (threads or processes) serialise on a flock, and an
// image appears in the cache atomically (rename) or not at all.
//
// Layout of the cache folder:
//
//	images/sha256-<hex>/rootfs/…        the unpacked image, files 0444, folders 0555
//	images/sha256-<hex>/image.json      what was unpacked (digests, skipped entries)
//	images/sha256-<hex>/check-*.json    cached containerDisk validations
//	refs/<hash of ref+platform>.json    last digest a tag (or index digest) resolved to
//	locks/sha256-<hex>.lock             flock files
//	tmp/                                unpacking in progress
//
// Errors are *ImageError values carrying a Reason a VMI condition can show, wrapping sentinels
// (ErrDigestMismatch, ErrNoDisk, …) for errors.Is.
package oci
