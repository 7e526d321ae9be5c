package collector

// SetTargetRegisteredHook holds the collector, in the tests that load BPF,
// between a target's registration and its opening; nil takes it away.
func SetTargetRegisteredHook(hook func()) { testHookTargetRegistered = hook }
