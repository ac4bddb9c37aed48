// Package guestvmi gives end-to-end tests a VMI that boots the project's test guest: the guest
// packed as a kernelBoot image (an OCI layout on disk, which the agent under test is told to
// pull a reference from) and a VMI that boots it.
package guestvmi
