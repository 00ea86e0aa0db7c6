<?php
$host = $_GET['host'];
system("ping -c 1 " . escapeshellarg($host));
exec("uptime", $output);
$files = shell_exec('ls -la /var/www');
