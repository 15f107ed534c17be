//go:build unix

package main

import (
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pyrun/pyrun/internal/procfs"
)

// stats summarises warm calls; times are in milliseconds.
type stats struct {
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
	CallsPerSec float64 `json:"calls_per_s"`
}

func summarize(s sample) stats {
	d := slices.Clone(s.durations)
	slices.Sort(d)
	return stats{
		P50:         ms(percentile(d, 0.50)),
		P90:         ms(percentile(d, 0.90)),
		P99:         ms(percentile(d, 0.99)),
		Max:         ms(d[len(d)-1]),
		CallsPerSec: math.Round(float64(len(d)) / s.wall.Seconds()),
	}
}

type ratio struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

func ratios(a, floor stats) ratio {
	return ratio{P50: round2(a.P50 / floor.P50), P99: round2(a.P99 / floor.P99)}
}

// series summarises a handful of repeated measurements.
type series struct {
	Runs   int       `json:"runs"`
	P50MS  float64   `json:"p50_ms"`
	P90MS  float64   `json:"p90_ms"`
	P99MS  float64   `json:"p99_ms"`
	MinMS  float64   `json:"min_ms"`
	MaxMS  float64   `json:"max_ms"`
	EachMS []float64 `json:"each_ms,omitempty"`
}

func newSeries(ds []time.Duration) *series {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	s := &series{
		Runs: len(ds), P50MS: ms(percentile(sorted, 0.5)), P90MS: ms(percentile(sorted, 0.9)),
		P99MS: ms(percentile(sorted, 0.99)), MinMS: ms(sorted[0]), MaxMS: ms(sorted[len(sorted)-1]),
	}
	if len(ds) <= 20 {
		for _, d := range ds {
			s.EachMS = append(s.EachMS, ms(d))
		}
	}
	return s
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
func round1(x float64) float64   { return math.Round(x*10) / 10 }
func round2(x float64) float64   { return math.Round(x*100) / 100 }
func round3(x float64) float64   { return math.Round(x*1000) / 1000 }

// ---- the machine -------------------------------------------------------------------

type machineInfo struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	MemGiB int64  `json:"mem_gib"`
	Go     string `json:"go"`
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if total, err := procfs.Size("/proc/meminfo", "MemTotal"); err == nil {
		m.MemGiB = int64(math.Round(float64(total) / (1 << 30)))
	}
	return m
}

// loadAverage is the one-minute load average: figures taken while other
// work shares the CPUs are slower and noisier.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}
