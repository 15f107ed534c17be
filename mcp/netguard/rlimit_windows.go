package netguard

// openFilesLimit: Windows has no per-process limit on open handles that
// a program reads (its handle table grows to millions).
func openFilesLimit() (uint64, bool) { return 0, false }
