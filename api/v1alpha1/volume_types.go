package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// Volume represents a named volume in a vmi.
//
// +kubebuilder:validation:XValidation:rule="(has(self.containerDisk) ? 1 : 0) + (has(self.emptyDisk) ? 1 : 0) + (has(self.hostDisk) ? 1 : 0) + (has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.dataVolume) ? 1 : 0) + (has(self.ephemeral) ? 1 : 0) + (has(self.cloudInitNoCloud) ? 1 : 0) + (has(self.cloudInitConfigDrive) ? 1 : 0) == 1",message="a volume must have exactly one source type set"
type Volume struct {
	// Volume's name.
	// Must be a DNS_LABEL and unique within the vmi.
	// More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// VolumeSource represents the location and type of the mounted volume.
	VolumeSource `json:",inline"`
}

// VolumeSource represents the source of a volume to mount.
// Exactly one of its members must be specified.
type VolumeSource struct {
	// HostDisk represents a disk created on the cluster level.
	// +optional
	HostDisk *HostDisk `json:"hostDisk,omitempty"`
	// PersistentVolumeClaimVolumeSource represents a reference to a PersistentVolumeClaim in the
	// same namespace. Directly attached to the vmi via qemu.
	// More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#persistentvolumeclaims
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// CloudInitNoCloud represents a cloud-init NoCloud user-data source.
	// The NoCloud data will be added as a disk to the vmi. A proper cloud-init installation is
	// required inside the guest.
	// More info: http://cloudinit.readthedocs.io/en/latest/topics/datasources/nocloud.html
	// +optional
	CloudInitNoCloud *CloudInitNoCloudSource `json:"cloudInitNoCloud,omitempty"`
	// CloudInitConfigDrive represents a cloud-init Config Drive user-data source.
	// The Config Drive data will be added as a disk to the vmi. A proper cloud-init installation
	// is required inside the guest.
	// More info: https://cloudinit.readthedocs.io/en/latest/topics/datasources/configdrive.html
	// +optional
	CloudInitConfigDrive *CloudInitConfigDriveSource `json:"cloudInitConfigDrive,omitempty"`
	// ContainerDisk references a container image, embedding a qcow or raw disk.
	// +optional
	ContainerDisk *ContainerDiskSource `json:"containerDisk,omitempty"`
	// Ephemeral is a special volume source that "wraps" specified source and provides
	// copy-on-write image on top of it.
	// +optional
	Ephemeral *EphemeralVolumeSource `json:"ephemeral,omitempty"`
	// EmptyDisk represents a temporary disk which shares the vmis lifecycle.
	// +optional
	EmptyDisk *EmptyDiskSource `json:"emptyDisk,omitempty"`
	// DataVolume represents the dynamic creation a PVC for this volume as well as
	// the process of populating that PVC with a disk image. vmlet attaches the PVC of the same
	// name; it does not run CDI.
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`
}

// HostDiskType says whether a host disk image must exist or may be created.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=Disk;DiskOrCreate
type HostDiskType string

// Host disk types.
const (
	// HostDiskExistsOrCreate: if the disk does not exist at the given path, a disk image will be
	// created there.
	HostDiskExistsOrCreate HostDiskType = "DiskOrCreate"
	// HostDiskExists: a disk image must exist at the given path.
	HostDiskExists HostDiskType = "Disk"
)

// HostDisk represents a disk created on the cluster level.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'DiskOrCreate' || !has(self.capacity) || !isQuantity(string(self.capacity)) || quantity(string(self.capacity)).compareTo(quantity('0')) == 0",message="capacity is allowed only with type DiskOrCreate",fieldPath=".capacity"
type HostDisk struct {
	// The path to HostDisk image located on the cluster.
	// Must be an absolute path without "." or ".." components.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*)+$`
	Path string `json:"path"`
	// Contains information if disk.img exists or should be created
	// allowed options are 'Disk' and 'DiskOrCreate'.
	Type HostDiskType `json:"type"`
	// Capacity of the sparse disk.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('0')) >= 0 && quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="capacity must be between 0 and 64Ti"
	Capacity resource.Quantity `json:"capacity,omitempty"`
	// Shared indicate whether the path is shared between nodes.
	// +optional
	Shared *bool `json:"shared,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referent.
	// More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// CloudInitNoCloudSource represents a cloud-init nocloud user data source.
// More info: http://cloudinit.readthedocs.io/en/latest/topics/datasources/nocloud.html
//
// +kubebuilder:validation:XValidation:rule="(has(self.secretRef) ? 1 : 0) + (has(self.userDataBase64) ? 1 : 0) + (has(self.userData) ? 1 : 0) <= 1",message="only one of secretRef, userDataBase64 and userData may be set"
// +kubebuilder:validation:XValidation:rule="(has(self.networkDataSecretRef) ? 1 : 0) + (has(self.networkDataBase64) ? 1 : 0) + (has(self.networkData) ? 1 : 0) <= 1",message="only one of networkDataSecretRef, networkDataBase64 and networkData may be set"
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) || has(self.userDataBase64) || has(self.userData) || has(self.networkDataSecretRef) || has(self.networkDataBase64) || has(self.networkData)",message="at least one user data or network data source must be set"
type CloudInitNoCloudSource struct {
	CloudInitData `json:",inline"`
}

// CloudInitConfigDriveSource represents a cloud-init config drive user data source.
// More info: https://cloudinit.readthedocs.io/en/latest/topics/datasources/configdrive.html
//
// +kubebuilder:validation:XValidation:rule="(has(self.secretRef) ? 1 : 0) + (has(self.userDataBase64) ? 1 : 0) + (has(self.userData) ? 1 : 0) <= 1",message="only one of secretRef, userDataBase64 and userData may be set"
// +kubebuilder:validation:XValidation:rule="(has(self.networkDataSecretRef) ? 1 : 0) + (has(self.networkDataBase64) ? 1 : 0) + (has(self.networkData) ? 1 : 0) <= 1",message="only one of networkDataSecretRef, networkDataBase64 and networkData may be set"
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) || has(self.userDataBase64) || has(self.userData) || has(self.networkDataSecretRef) || has(self.networkDataBase64) || has(self.networkData)",message="at least one user data or network data source must be set"
type CloudInitConfigDriveSource struct {
	CloudInitData `json:",inline"`
}

// CloudInitData is the user data and network data shared by the NoCloud and ConfigDrive
// sources. Inline data is limited to 2048 bytes as in KubeVirt; use a Secret for more.
type CloudInitData struct {
	// UserDataSecretRef references a k8s secret that contains cloud-init userdata.
	// +optional
	UserDataSecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// UserDataBase64 contains cloud-init userdata as a base64 encoded string.
	// +optional
	// +kubebuilder:validation:MaxLength=2732
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]*={0,2}$`
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// UserData contains cloud-init inline userdata.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	UserData string `json:"userData,omitempty"`
	// NetworkDataSecretRef references a k8s secret that contains cloud-init networkdata.
	// +optional
	NetworkDataSecretRef *LocalObjectReference `json:"networkDataSecretRef,omitempty"`
	// NetworkDataBase64 contains cloud-init networkdata as a base64 encoded string.
	// +optional
	// +kubebuilder:validation:MaxLength=2732
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]*={0,2}$`
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`
	// NetworkData contains cloud-init inline networkdata.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	NetworkData string `json:"networkData,omitempty"`
}

// DataVolumeSource names a DataVolume (and its PVC) in the same namespace.
type DataVolumeSource struct {
	// Name of both the DataVolume and the PVC in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Hotpluggable indicates whether the volume can be hotplugged and hotunplugged.
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}

// PersistentVolumeClaimSource references a PersistentVolumeClaim in the same namespace, like
// core/v1 PersistentVolumeClaimVolumeSource.
type PersistentVolumeClaimSource struct {
	// claimName is the name of a PersistentVolumeClaim in the same namespace as the pod using
	// this volume.
	// More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#persistentvolumeclaims
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ClaimName string `json:"claimName"`
	// readOnly Will force the ReadOnly setting in VolumeMounts.
	// Default false.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// PersistentVolumeClaimVolumeSource represents a reference to a PersistentVolumeClaim in the
// same namespace. Directly attached to the vmi via qemu.
// More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#persistentvolumeclaims
type PersistentVolumeClaimVolumeSource struct {
	PersistentVolumeClaimSource `json:",inline"`
	// Hotpluggable indicates whether the volume can be hotplugged and hotunplugged.
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}

// EphemeralVolumeSource puts a copy-on-write overlay, discarded with the vmi, over a PVC.
type EphemeralVolumeSource struct {
	// PersistentVolumeClaimVolumeSource represents a reference to a PersistentVolumeClaim in the
	// same namespace. Directly attached to the vmi via qemu.
	// More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#persistentvolumeclaims
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimSource `json:"persistentVolumeClaim,omitempty"`
}

// EmptyDiskSource represents a temporary disk which shares the vmis lifecycle.
type EmptyDiskSource struct {
	// Capacity of the sparse disk.
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('0')) > 0 && quantity(string(self)).compareTo(quantity('64Ti')) <= 0)",message="capacity must be greater than 0 and at most 64Ti"
	Capacity resource.Quantity `json:"capacity"`
}

// ContainerDiskSource represents a container image with an embedded disk.
type ContainerDiskSource struct {
	// Image is the name of the image with the embedded disk.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`
	Image string `json:"image"`
	// Path defines the path to disk file in the container.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*)+$`
	Path string `json:"path,omitempty"`
	// Image pull policy.
	// One of Always, Never, IfNotPresent.
	// Defaults to Always if :latest tag is specified, or IfNotPresent otherwise.
	// Cannot be updated.
	// More info: https://kubernetes.io/docs/concepts/containers/images#updating-images
	// +optional
	ImagePullPolicy PullPolicy `json:"imagePullPolicy,omitempty"`
	// ImagePullSecret is the name of a Secret in the VMI's namespace, of type
	// kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg, whose credentials the node
	// uses to pull the image.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
}
