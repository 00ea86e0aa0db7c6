<?php
$host = $_GET['host'];
system("ping -c 1 " . $host); // want: command-injection
$files = shell_exec("ls -la $dir"); // want: command-injection
$log = `tail -n 50 $logfile`; // want: command-injection
