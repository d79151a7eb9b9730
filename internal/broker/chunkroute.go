package broker

import "github.com/meridian-mq/meridian/internal/mtypes"

// On a Shared subscription the chunks of one chunked message must all reach the consumer that got
// its first chunk, or the client cannot reassemble it. A chunkRoute records that consumer from the
// first chunk on; it ends with the message's last chunk, or as soon as none of the message's chunks
// is pending at that consumer any more (acknowledged, or put back for redelivery), so a message
// whose last chunk never comes leaves nothing behind.

// chunkRoute is where the chunks of one chunked message go.
type chunkRoute struct {
	to *dconsumer
	// pending counts the message's chunks delivered to `to` and still pending there.
	pending int
}

// routeChunk records that e, a chunk of a chunked message on a Shared subscription, was delivered
// to c.
func (d *dispatchState) routeChunk(e *entryInfo, c *dconsumer) {
	if e.lastChunk {
		d.endChunkRoute(e.chunkUUID)
		return
	}
	r := d.chunkOwner[e.chunkUUID]
	if r == nil || r.to != c {
		if d.chunkOwner == nil {
			d.chunkOwner = make(map[string]*chunkRoute)
		}
		r = &chunkRoute{to: c}
		d.chunkOwner[e.chunkUUID] = r
	}
	r.pending++
	if d.chunkOf == nil {
		d.chunkOf = make(map[mtypes.Position]string)
	}
	d.chunkOf[e.pos] = e.chunkUUID
}

// endChunkRoute forgets a message's route; its chunks still pending no longer count.
func (d *dispatchState) endChunkRoute(uuid string) {
	delete(d.chunkOwner, uuid)
}

// chunkLeft records that the entry at p left consumer c's pending entries; if it was a chunk, its
// message's route loses it, and ends with its last pending chunk.
func (d *dispatchState) chunkLeft(p mtypes.Position, c *dconsumer) {
	uuid, ok := d.chunkOf[p]
	if !ok {
		return
	}
	delete(d.chunkOf, p)
	if r := d.chunkOwner[uuid]; r != nil && r.to == c {
		if r.pending--; r.pending <= 0 {
			delete(d.chunkOwner, uuid)
		}
	}
}

// clearChunkRoutes forgets every route (every pending entry was dropped or put back).
func (d *dispatchState) clearChunkRoutes() {
	clear(d.chunkOwner)
	clear(d.chunkOf)
}
