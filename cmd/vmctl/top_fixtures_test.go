package main

// Expositions the test agents serve, before and after the interval (10 s in the tests).
// Node n1: default/web (two drives, two interfaces) and default/db; node n2: prod/api whose
// QEMU restarted between the scrapes (its counters went down) and default/fresh that started
// between them (no series in the first scrape).
const (
	n1First = `# HELP kubevirt_vmi_cpu_usage_seconds_total Total CPU time spent in all modes.
# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{name="web",namespace="default",node="n1"} 100
kubevirt_vmi_cpu_usage_seconds_total{name="db",namespace="default",node="n1"} 40
# TYPE kubevirt_vmi_memory_resident_bytes gauge
kubevirt_vmi_memory_resident_bytes{name="web",namespace="default",node="n1"} 2.4e+08
kubevirt_vmi_memory_resident_bytes{name="db",namespace="default",node="n1"} 1.1e+09
# TYPE kubevirt_vmi_memory_domain_bytes gauge
kubevirt_vmi_memory_domain_bytes{name="web",namespace="default",node="n1"} 2.68435456e+08
kubevirt_vmi_memory_domain_bytes{name="db",namespace="default",node="n1"} 1.073741824e+09
# TYPE kubevirt_vmi_storage_read_traffic_bytes_total counter
kubevirt_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="web",namespace="default",node="n1"} 1e+06
kubevirt_vmi_storage_read_traffic_bytes_total{drive="datadisk",name="web",namespace="default",node="n1"} 0
kubevirt_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="db",namespace="default",node="n1"} 5e+06
# TYPE kubevirt_vmi_storage_write_traffic_bytes_total counter
kubevirt_vmi_storage_write_traffic_bytes_total{drive="rootdisk",name="web",namespace="default",node="n1"} 0
kubevirt_vmi_storage_write_traffic_bytes_total{drive="datadisk",name="web",namespace="default",node="n1"} 0
kubevirt_vmi_storage_write_traffic_bytes_total{drive="rootdisk",name="db",namespace="default",node="n1"} 1e+07
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",name="web",namespace="default",node="n1"} 1000
kubevirt_vmi_network_receive_bytes_total{interface="blue",name="web",namespace="default",node="n1"} 0
# TYPE kubevirt_vmi_network_transmit_bytes_total counter
kubevirt_vmi_network_transmit_bytes_total{interface="default",name="web",namespace="default",node="n1"} 500
kubevirt_vmi_network_transmit_bytes_total{interface="blue",name="web",namespace="default",node="n1"} 0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12
`
	n1Second = `# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{name="web",namespace="default",node="n1"} 105
kubevirt_vmi_cpu_usage_seconds_total{name="db",namespace="default",node="n1"} 40.5
# TYPE kubevirt_vmi_memory_resident_bytes gauge
kubevirt_vmi_memory_resident_bytes{name="web",namespace="default",node="n1"} 2.5e+08
kubevirt_vmi_memory_resident_bytes{name="db",namespace="default",node="n1"} 1.1e+09
# TYPE kubevirt_vmi_memory_domain_bytes gauge
kubevirt_vmi_memory_domain_bytes{name="web",namespace="default",node="n1"} 2.68435456e+08
kubevirt_vmi_memory_domain_bytes{name="db",namespace="default",node="n1"} 1.073741824e+09
# TYPE kubevirt_vmi_storage_read_traffic_bytes_total counter
kubevirt_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="web",namespace="default",node="n1"} 1.2048e+06
kubevirt_vmi_storage_read_traffic_bytes_total{drive="datadisk",name="web",namespace="default",node="n1"} 1e+07
kubevirt_vmi_storage_read_traffic_bytes_total{drive="rootdisk",name="db",namespace="default",node="n1"} 5e+06
# TYPE kubevirt_vmi_storage_write_traffic_bytes_total counter
kubevirt_vmi_storage_write_traffic_bytes_total{drive="rootdisk",name="web",namespace="default",node="n1"} 10240
kubevirt_vmi_storage_write_traffic_bytes_total{drive="datadisk",name="web",namespace="default",node="n1"} 0
kubevirt_vmi_storage_write_traffic_bytes_total{drive="rootdisk",name="db",namespace="default",node="n1"} 1.1e+07
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",name="web",namespace="default",node="n1"} 21480
kubevirt_vmi_network_receive_bytes_total{interface="blue",name="web",namespace="default",node="n1"} 0
# TYPE kubevirt_vmi_network_transmit_bytes_total counter
kubevirt_vmi_network_transmit_bytes_total{interface="default",name="web",namespace="default",node="n1"} 5620
kubevirt_vmi_network_transmit_bytes_total{interface="blue",name="web",namespace="default",node="n1"} 5120
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 13
`
	n2First = `# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{name="api",namespace="prod",node="n2"} 5000
# TYPE kubevirt_vmi_memory_resident_bytes gauge
kubevirt_vmi_memory_resident_bytes{name="api",namespace="prod",node="n2"} 3e+09
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",name="api",namespace="prod",node="n2"} 9e+09
`
	n2Second = `# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{name="api",namespace="prod",node="n2"} 15
kubevirt_vmi_cpu_usage_seconds_total{name="fresh",namespace="default",node="n2"} 1
# TYPE kubevirt_vmi_memory_resident_bytes gauge
kubevirt_vmi_memory_resident_bytes{name="api",namespace="prod",node="n2"} 5e+08
kubevirt_vmi_memory_resident_bytes{name="fresh",namespace="default",node="n2"} 1.5e+08
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",name="api",namespace="prod",node="n2"} 1e+06
`
)
