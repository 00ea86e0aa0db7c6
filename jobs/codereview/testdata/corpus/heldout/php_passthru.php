<?php
passthru('ls -la ' . $_GET['d']); // want: command-injection
$out = [];
exec('whoami', $out);
