// Package hostile loads the hostile-input cases of vmlet's end-to-end suite
// (controllers.TestHostileInputs): data files in cases/, one per case, so that a case is added
// without code.
//
// A case file is a header of "# key: value" comment lines, then YAML documents: one or more
// VirtualMachineInstances (vmlet.dev/v1alpha1) and the Secrets they name. The documents are a
// text/template first (see Vars and Funcs), so a case can say "2,048 bytes" without spelling
// them out.
//
//	# expect: rejected                       rejected | failed | runs
//	# field: spec.domain.devices.disks[0].name  rejected: the API's message names this field
//	# reason: HostPathNotAllowed             failed: the VMI's reason (status, condition or Warning event)
//	# message: /etc/passwd                   optional: a substring of the API's or the VMI's message
//	# image: vmlet.dev/hostile/nodisk:1=nodisk   serve fixture "nodisk" under that name (repeatable)
//	# patch: {"spec":{"paused":true}}        a JSON merge patch applied to each VMI right after create
//	# deadline: 2m                           how long the outcome may take (default DefaultDeadline)
//	# about: why this case exists            free text (repeatable)
//
// The outcome holds for every VMI of the file: rejected — the API refuses it with a message naming
// the field; failed — it is admitted and reaches Failed, or Synchronized=False, or a Warning
// event, with the reason, within the deadline; runs — it is admitted and reaches Running. In
// every class the VMIs are then deleted and must leave nothing on the node. Secrets are created
// before the VMIs and must be admitted.
//
// The package is pure: Parse and Load read bytes and files, nothing else.
package hostile
