// Package accel decides which QEMU accelerator a host can really use.
//
// "/dev/kvm opens" is not the test: on nested-PVM hosts (the kvm_pvm module) KVM_CREATE_VM
// succeeds and QEMU reports KVM enabled, yet real guests abort. The rule here is: KVM only if the
// CPU advertises vmx or svm, the kvm_pvm module is not loaded, and /dev/kvm opens and answers
// KVM_GET_API_VERSION; otherwise TCG. The decision carries its reason so that callers can report
// which accelerator was used and why.
package accel
