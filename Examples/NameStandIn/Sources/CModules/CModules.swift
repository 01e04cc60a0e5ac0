import CCurl
import CHiredis
import CLibPQ

/// The three stand-in C modules, read so each is compiled into the graph.
public let cStandIns = CHiredis_stand_in + CLibPQ_stand_in + CCurl_stand_in
