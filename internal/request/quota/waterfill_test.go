package quota

import (
	"slices"
	"testing"
)

func TestWaterFill(t *testing.T) {
	cases := []struct {
		name   string
		total  int64
		demand []int64
		want   []int64
	}{
		{"all satisfied", 100, []int64{10, 20, 30}, []int64{10, 20, 30}},
		{"one capped", 100, []int64{10, 200, 30}, []int64{10, 60, 30}},
		{"equal split", 90, []int64{100, 100, 100}, []int64{30, 30, 30}},
		{"unknown wants a full share", 100, []int64{-1, 10, -1}, []int64{45, 10, 45}},
		{"remainder to the first", 10, []int64{-1, -1, -1}, []int64{4, 3, 3}},
		{"nothing", 0, []int64{5, 5}, []int64{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := waterFill(c.total, c.demand)
			if !slices.Equal(got, c.want) {
				t.Fatalf("waterFill(%d, %v) = %v, want %v", c.total, c.demand, got, c.want)
			}
		})
	}
}
