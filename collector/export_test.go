package collector

// SetTargetRegisteredHook holds the collector, in the tests that load BPF,
// between a target's registration and its opening; nil takes it away.
func SetTargetRegisteredHook(hook func()) { testHookTargetRegistered = hook }

// SetHideSwitchIns has the programs of the windows opened after it see no
// switch-in of a target's thread (or see them again, with false).
func SetHideSwitchIns(hide bool) { testHideSwitchIns = hide }

// SetTargetForgottenHook calls hook with each exited target's pid once it
// has left the programs' targets; nil takes it away.
func SetTargetForgottenHook(hook func(pid int)) { testHookTargetForgotten = hook }
