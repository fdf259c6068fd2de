package main

import (
	"slices"
	"time"
)

// latencies collects the round trips of a ping-pong test. Memory is
// allocated up front, so recording does not allocate inside the timed
// loop.
type latencies struct {
	rtts []time.Duration
}

func newLatencies(n int) *latencies { return &latencies{rtts: make([]time.Duration, 0, n)} }

func (l *latencies) add(rtt time.Duration) { l.rtts = append(l.rtts, rtt) }

// latSummary is in microseconds of half round trip, as ib_send_lat
// reports (its t_typical is the median).
type latSummary struct {
	avg, p50, min, p99, max float64
}

func (l *latencies) summary() latSummary {
	if len(l.rtts) == 0 {
		return latSummary{}
	}
	s := slices.Clone(l.rtts)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	half := func(d time.Duration) float64 { return float64(d) / 2 / float64(time.Microsecond) }
	rank := func(p float64) time.Duration { // nearest rank
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return latSummary{
		avg: half(sum / time.Duration(len(s))),
		p50: half(rank(0.50)), min: half(s[0]), p99: half(rank(0.99)), max: half(s[len(s)-1]),
	}
}
