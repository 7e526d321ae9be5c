<?php
// Spins in Worker::heavy_work, called by a closure array_map calls, called
// by outer, called at the top level: the frames TestLiveFrames reads.
class Worker {
    public function heavy_work($n) {
        $s = 0;
        for ($i = 0; $i < $n; $i++) { $s += $i * $i; }
        return $s;
    }
}

function outer() {
    $w = new Worker();
    return array_map(fn($n) => $w->heavy_work($n), [PHP_INT_MAX]);
}

echo "ready\n";
outer();
