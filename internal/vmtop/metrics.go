package vmtop

// Metric names (KubeVirt's) and the labels Rows reads.
const (
	MetricCPUUsageSeconds  = "kubevirt_vmi_cpu_usage_seconds_total"
	MetricMemoryResident   = "kubevirt_vmi_memory_resident_bytes"
	MetricMemoryDomain     = "kubevirt_vmi_memory_domain_bytes"
	MetricStorageReadBytes = "kubevirt_vmi_storage_read_traffic_bytes_total"
	MetricStorageWriteByte = "kubevirt_vmi_storage_write_traffic_bytes_total"
	MetricNetworkRxBytes   = "kubevirt_vmi_network_receive_bytes_total"
	MetricNetworkTxBytes   = "kubevirt_vmi_network_transmit_bytes_total"

	LabelNode      = "node"
	LabelNamespace = "namespace"
	LabelName      = "name"
)
