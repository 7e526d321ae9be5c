package serve

import "github.com/reqprof/reqprof/collector"

func collectorProgress(lost []uint64) collector.Progress { return collector.Progress{Lost: lost} }
