package ui

// MaxItemReadings is maxItemReadings, for the tests of package ui_test.
const MaxItemReadings = maxItemReadings
