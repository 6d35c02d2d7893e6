package bench

import (
	"crypto/sha256"
	"time"
)

// calibrationMiB is what the header's calibration hashes: the figure is the seconds one
// core takes to SHA-256 this many MiB. The machine's speed drifts (a shared or
// throttled host can be half as fast in one phase as in another), and a row's figures
// mean little without it.
const calibrationMiB = 300

// rowCalibrationMiB is the smaller sample taken before each row, scaled to
// calibrationMiB so that rows and header share one unit.
const rowCalibrationMiB = 30

// calibrate returns the seconds SHA-256 takes over calibrationMiB on one core, measured
// over mib MiB and scaled (mib ≤ 0: the whole calibrationMiB).
func calibrate(mib int) float64 {
	if mib <= 0 || mib > calibrationMiB {
		mib = calibrationMiB
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	h := sha256.New()
	start := time.Now()
	for range mib {
		h.Write(buf)
	}
	_ = h.Sum(nil)
	return time.Since(start).Seconds() * calibrationMiB / float64(mib)
}

// conditions is the machine's state when a row starts: its 1-minute load average and
// a calibration sample.
type conditions struct {
	Load        float64
	Calibration float64
}

func measureConditions() conditions {
	return conditions{Load: loadAvg(), Calibration: calibrate(rowCalibrationMiB)}
}

// Calibrate is calibrate for measurements outside the benchmark (a test's logged rate),
// so that their figures share its unit: seconds for one core to SHA-256 calibrationMiB.
func Calibrate(mib int) float64 { return calibrate(mib) }
