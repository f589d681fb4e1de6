package info

import "testing"

func TestAppendWritesRedisInfoText(t *testing.T) {
	got := string(Append([]byte("x"), Section{Title: "Store", Fields: []Field{
		Int("n", -3), Text("mode", "store"), Seconds("lag", 1.23456),
	}}))
	want := "x# Store\r\nn:-3\r\nmode:store\r\nlag:1.235\r\n"
	if got != want {
		t.Fatalf("Append = %q, want %q", got, want)
	}
}
