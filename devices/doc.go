// Package devices grants each launcher exactly the devices it needs with eBPF cgroup-v2 device
// programs: rules to program (pure) and attach/replace/recover (kernel). No Kubernetes types.
package devices
