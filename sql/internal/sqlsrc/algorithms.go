package sqlsrc

// generatedSource returns the files of sql/src the generator writes.
func generatedSource() map[string]string { return map[string]string{} }

func nativeHeader() string { return "" }
