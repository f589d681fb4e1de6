//go:build !race

package gcfloor

const raceBuild = false
