// Package cloudinit builds KubeVirt's cloud-init disks: cloudInitNoCloud (an ISO 9660 labelled
// "cidata" with user-data, meta-data and network-config at its root) and cloudInitConfigDrive
// (labelled "config-2" with openstack/latest/{meta_data.json,user_data,network_data.json}).
//
// The ISO is written in Go with github.com/diskfs/go-diskfs, with Rock Ridge and Joliet names:
// plain ISO 9660 names cannot hold '-' or lowercase, so "user-data" needs an extension (Linux
// and cloud-init read Rock Ridge; Windows' cloudbase-init reads Joliet). Secret references are
// resolved by the caller: this package only sees bytes.
//
// Equivalent to: genisoimage -output cidata.iso -volid cidata -joliet -rock user-data meta-data
// network-config
package cloudinit
