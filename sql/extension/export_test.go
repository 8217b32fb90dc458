package extension

// Prologue is prologue.sql for a script that does action, for the tests.
var Prologue = prologue
