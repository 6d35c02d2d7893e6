//go:build !race

package webhook_test

const raceEnabled = false
