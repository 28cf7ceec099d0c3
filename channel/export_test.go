package channel

// SetScopeID sets the id the channel's last scope had: the next Scope
// takes the one after it.
func SetScopeID(m *MultiChannel, id uint32) { m.c.scopeID = id }
