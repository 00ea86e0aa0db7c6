<?php
$config = [
    'aws_key' => '@@SECRET:aws@@', // want: hardcoded-secret
    'region' => 'us-east-1',
];
