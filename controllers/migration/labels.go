package migration

// Labels the migration controller puts on a vmi when it hands a migration to the nodes: the
// node agents of a cluster cache only the vmis of their node (status.nodeName), so the target's
// agent finds the vmi by LabelTargetNode and the source's, once the target took the vmi over,
// by LabelSourceNode (nodeagent.MigrationCaches). They stay after the migration ended; the next
// migration overwrites them.
const (
	LabelSourceNode = "vmlet.dev/migration-source-node"
	LabelTargetNode = "vmlet.dev/migration-target-node"
)
