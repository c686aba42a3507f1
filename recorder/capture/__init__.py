"""Capture: getting every frame off the wire and into the store, whatever happens.

Taps (`taps.stdio`, `taps.http`, `taps.bridge`) relay and journal each frame before they forward it;
the shipper and its worker move the journal into the store off the relay path (`shipper`,
`ship_worker`, `salvage`), what a killed tap left behind is shipped by `leftovers`, and the
shipper side watches the traffic it stored (`observer`, `heartbeat`, `idle`).
"""
