package dat

// This file holds the completion-flag compatibility rules that
// dat_ep_create(3DAT) and dat_ep_create_with_srq state for EVDs shared by
// several event streams. They are checked whenever an EP stream is attached
// to an EVD (create, create_with_srq, modify); a violation is
// DAT_INVALID_PARAMETER.
//
//  1. The DTO/RMR completion streams sharing an EVD have matching
//     completion flags.
//  2. An EVD also fed by a stream other than DTO/RMR completions
//     (connection, CR, async or software events) only takes EP streams with
//     DAT_COMPLETION_EVD_THRESHOLD_FLAG (the man page's
//     "DAT_COMPLETION_THRESHOLD").
//  3. If one stream on an EVD is UNSIGNALLED, every request and recv stream
//     on it is UNSIGNALLED.
//  4. If a recv stream on an EVD is SOLICITED_WAIT, every recv stream on it
//     is SOLICITED_WAIT and the EVD carries no other stream type.
//  5. Hence dat_evd_wait on an EVD fed by UNSIGNALLED or SOLICITED_WAIT
//     streams only accepts threshold 1 (DAT_INVALID_STATE otherwise).

// dtoStream is one EP completion stream attached to an EVD.
type dtoStream struct {
	ep    *EP
	recv  bool // receive stream; false: request stream
	flags CompletionFlags
}

// evdStreams records what feeds an EVD. Guarded by the IA's mutex.
type evdStreams struct {
	dto []dtoStream
	// conn and cr count the EPs using the EVD as their connection EVD and
	// the service points posting connection requests to it.
	conn, cr int
}

// normFlags maps DAT_COMPLETION_DEFAULT_FLAG to EVD_THRESHOLD, which is
// what the default means for an EP's completion-flag attribute.
func normFlags(f CompletionFlags) CompletionFlags {
	if f == CompletionDefault {
		return CompletionEVDThreshold
	}
	return f
}

// hasOther reports whether a stream other than DTO completions feeds e.
//
// An EVD created with EVDSoftware counts as fed by its software event
// stream for its whole life, whether or not anything was posted yet: the
// consumer may call PostSE at any time, and the flag is the only
// declaration of that stream. Rule 2 therefore holds at every attach, and
// PostSE never meets a DTO stream with other flags than EVD_THRESHOLD.
func (e *EVD) hasOther() bool {
	return e.streams.conn > 0 || e.streams.cr > 0 || e.isAsync || e.flags&EVDSoftware != 0
}

// thresholdOneOnly reports rule 5: an EVD fed by UNSIGNALLED or
// SOLICITED_WAIT DTO streams can only be waited on with threshold 1.
func (s *evdStreams) thresholdOneOnly() bool {
	for _, d := range s.dto {
		if f := normFlags(d.flags); f == CompletionUnsignalled || f == CompletionSolicitedWait {
			return true
		}
	}
	return false
}

// canAddDTO checks a new DTO stream with the given flags against the
// streams already on e, ignoring those of skip (the EP being modified). It
// returns a reason when a rule forbids it.
func (e *EVD) canAddDTO(flags CompletionFlags, skip *EP) string {
	f := normFlags(flags)
	// Rule 2: an EVD that also carries connection, CR, async or software
	// events only takes EVD_THRESHOLD DTO streams.
	if e.hasOther() && f != CompletionEVDThreshold {
		return "an EVD fed by non-DTO streams (connection, CR, async or software events) only takes DAT_COMPLETION_EVD_THRESHOLD_FLAG completion streams"
	}
	for _, d := range e.streams.dto {
		if d.ep == skip {
			continue
		}
		// Rules 1, 3 and 4: every DTO stream on one EVD has the same
		// completion flags (so UNSIGNALLED and SOLICITED_WAIT spread to
		// all, and SOLICITED_WAIT, a receive-only value, excludes request
		// streams).
		if normFlags(d.flags) != f {
			return "completion flags differ from those of another stream on the EVD"
		}
	}
	return ""
}

// canAddOther checks that a non-DTO stream may join e (rule 2 read from the
// other side).
func (e *EVD) canAddOther(skip *EP) string {
	for _, d := range e.streams.dto {
		if d.ep != skip && normFlags(d.flags) != CompletionEVDThreshold {
			return "the EVD carries DTO streams whose completion flags are not EVD_THRESHOLD"
		}
	}
	return ""
}

func (e *EVD) addDTO(ep *EP, recv bool, flags CompletionFlags) {
	e.streams.dto = append(e.streams.dto, dtoStream{ep: ep, recv: recv, flags: flags})
	e.oneOnly.Store(e.streams.thresholdOneOnly())
}

func (e *EVD) removeDTO(ep *EP) {
	out := e.streams.dto[:0]
	for _, d := range e.streams.dto {
		if d.ep != ep {
			out = append(out, d)
		}
	}
	e.streams.dto = out
	e.oneOnly.Store(e.streams.thresholdOneOnly())
}
