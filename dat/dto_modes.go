package dat

// deliveryMode says what a successful completion of one posted DTO turns
// into; each entry of a work queue (wrQueue) carries one.
type deliveryMode uint8

const (
	deliverNotify   deliveryMode = iota // queue the event and wake a waiter
	deliverQuiet                        // UNSIGNALLED: queue without waking
	deliverSuppress                     // SUPPRESS: no event on success
)
