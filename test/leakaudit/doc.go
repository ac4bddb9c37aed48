// Package leakaudit finds what a test's VMs left on the node: it takes a snapshot of the node
// objects in a scope before the test and, after it, lists per kind what is there now and was
// not before. The kinds are
//
//	processes     processes whose command line names one of Scope.Processes, and every
//	              process in a cgroup below Scope.Cgroups
//	cgroups       folders below Scope.Cgroups
//	netns         namespace mounts in Scope.NetnsDirs
//	links         links in Scope.Netns other than taps (Scope.IgnoreLink aside)
//	taps          tun/tap links in Scope.Netns
//	nft tables    nftables tables in Scope.Netns
//	bpf programs  programs attached to a cgroup below Scope.Cgroups, and programs held open by
//	              this process (the in-process agent of the controllers tests) or a process
//	              in scope
//	mounts        mount points below Scope.Dirs or Scope.NetnsDirs
//	files         files and folders below Scope.Dirs
//
// Use:
//
//	before, err := leakaudit.Take(scope)
//	… create and delete VMs …
//	rep := before.Settle(2*time.Minute) // teardown is partly asynchronous (netns, cgroups)
//	t.Log(rep)                          // "processes 0, cgroups 0, netns 0, …, files 0"
//	if rep.Total() > 0 { t.Error(rep.Detail()) }
//
// Nothing here changes the node. Needs root for other namespaces, cgroups and BPF.
package leakaudit
