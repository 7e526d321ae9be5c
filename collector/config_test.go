package collector

import "testing"

// Run's defaults and derived fields, decided in one place, and what the
// programs are fixed with from them.
func TestConfigResolved(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     Config
		capture int
		hz      int
		follow  bool
		bpf     reqprofConfig
	}{
		{"zero", Config{}, MaxCaptureBytes, 0, false,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes}},
		{"capture", Config{CaptureBytes: 64}, 64, 0, false, reqprofConfig{CaptureBytes: 64, ChunkBytes: chunkBytes}},
		{"no payload", Config{CaptureBytes: 64, NoPayload: true}, 0, 0, false, reqprofConfig{}},
		{"stacks", Config{Stacks: true}, MaxCaptureBytes, DefaultStackHz, false,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes}},
		{"stack hz", Config{Stacks: true, StackHz: 99}, MaxCaptureBytes, 99, false,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes}},
		{"stack hz without stacks", Config{StackHz: 99}, MaxCaptureBytes, 0, false,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes}},
		{"cgroup", Config{Targets: []Target{{PID: 1}, {Cgroup: "/sys/fs/cgroup/x"}}}, MaxCaptureBytes, 0, true,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes, FollowChildren: 1}},
		{"lite, children", Config{Lite: true, FollowChildren: true}, MaxCaptureBytes, 0, true,
			reqprofConfig{CaptureBytes: uint32(MaxCaptureBytes), ChunkBytes: chunkBytes, FollowChildren: 1, Lite: 1}},
	} {
		r := c.cfg.resolved()
		if r.CaptureBytes != c.capture || r.StackHz != c.hz || r.FollowChildren != c.follow {
			t.Errorf("%s: capture %d, %d Hz, children %v; want %d, %d Hz, %v",
				c.name, r.CaptureBytes, r.StackHz, r.FollowChildren, c.capture, c.hz, c.follow)
		}
		if got := r.bpfConfig(); got != c.bpf {
			t.Errorf("%s: programs fixed with %+v, want %+v", c.name, got, c.bpf)
		}
	}
}
