// Package devices grants each launcher exactly the devices it needs with eBPF cgroup-v2 device
// programs: rules to program (pure) and attach/replace/recover (kernel). No Kubernetes types.
//
// Pure (any OS): Rule, Evaluate (the reference decision), Compile (rules to a
// BPF_PROG_TYPE_CGROUP_DEVICE program as cilium/ebpf asm, golden-tested), Baseline and
// RuncDefaultRules.
//
// Kernel (_linux.go, root): Attach, ReplaceKeeping, Recover and Filter (Grant, Revoke, Rules,
// Detach); Cgroup, Jail and FindCgroup2Mount; Probe.
//
// Design, in short:
//   - One program per cgroup: static rules compiled in, then lookups in a hash map of grants
//     keyed {type, major, minor} (exact, minor *, major *, both *). Grant and Revoke are map
//     updates: the next open(2)/mknod(2) sees them, no program is replaced.
//   - A static-rules change replaces the program atomically (BPF_PROG_ATTACH with
//     BPF_F_REPLACE); the new program shares the grants map, so there is never a moment with no
//     filter, with two filters, or without the grants.
//   - Legacy attach with BPF_F_ALLOW_MULTI: the cgroup owns the program, it outlives the
//     attaching process, nothing is pinned, and it is freed with the cgroup. Recover finds it
//     by name (vmlet_dev_v1) and its maps (vmlet_grants_v1; vmlet_rules_v1, bound to the
//     program with BPF_PROG_BIND_MAP and recording its static rules).
//   - Programs on one cgroup AND each other, so Attach refuses to stack on a foreign program
//     (ErrForeignProgram) and ReplaceKeeping replaces it with one that keeps its rules.
package devices
