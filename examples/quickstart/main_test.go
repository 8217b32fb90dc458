package main

// The README shows main.go byte for byte (tests/docs); this holds its
// output to what the README says it prints.
func Example_main() {
	main()
	// Output:
	// request 1: allowed=true by=burst remaining=2
	// request 2: allowed=true by=burst remaining=1
	// request 3: allowed=true by=burst remaining=0
	// request 4: allowed=false by=burst remaining=0 retry_after=1s
}
